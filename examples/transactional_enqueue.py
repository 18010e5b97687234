"""Enqueue inside your own SQLAlchemy ORM transaction: the task exists only if it commits.

python examples/transactional_enqueue.py
"""

from __future__ import annotations

import os

import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

import jobq
from jobq.dialects.schema import tasks
from jobq.worker import Worker

# A SQLite file of its own, so that another example run in the same directory never meets
# these tasks (its worker would fail them as not registered); $JOBQ_DATABASE_URL if set.
app = jobq.App(os.environ.get("JOBQ_DATABASE_URL") or "sqlite:///examples-transactional-enqueue.db")


class Base(DeclarativeBase):
    pass


class User(Base):
    __tablename__ = "example_users"
    id: Mapped[int] = mapped_column(primary_key=True)
    email: Mapped[str]


@app.task
def send_welcome(user_id: int, email: str) -> str:
    return f"welcome mail for user {user_id} sent to {email}"


def sign_up(session: Session, email: str) -> int:
    """Create the user and enqueue its welcome mail in the same transaction."""
    user = User(email=email)
    session.add(user)
    session.flush()  # assigns user.id
    send_welcome.enqueue(user_id=user.id, email=email, _connection=session.connection())
    return user.id


def start_afresh() -> None:
    """Create or upgrade jobq's tables, then delete the tasks earlier runs of this example
    left (its own tasks only), so that every run starts from an empty queue."""
    app.migrate()
    names = [definition.name for definition in app.registry]
    with app.store.engine.begin() as conn:
        conn.execute(sa.delete(tasks).where(tasks.c.name.in_(names)))


def main() -> None:
    start_afresh()
    engine = app.store.engine  # or your application's own engine on the same database
    Base.metadata.drop_all(engine)  # the users of earlier runs too: start from none
    Base.metadata.create_all(engine)
    with Session(engine) as session, session.begin():
        sign_up(session, "ada@example.com")
    try:
        with Session(engine) as session, session.begin():
            sign_up(session, "bob@example.com")
            raise RuntimeError("payment declined")  # rolls back the user AND its task
    except RuntimeError as error:
        print(f"bob's sign-up failed ({error}): neither his row nor his mail exists")
    Worker(app, burst=True, poll_interval=0.05).run()
    for task in app.store.list_tasks():
        print(f"task {task.id}: {task.status} -> {task.result!r}")
    with Session(engine) as session:
        print("users:", [u.email for u in session.scalars(sa.select(User))])


if __name__ == "__main__":
    main()
