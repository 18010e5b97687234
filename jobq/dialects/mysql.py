"""MySQL 8 / MariaDB 10.6+: SELECT ... FOR UPDATE SKIP LOCKED, then UPDATE by ids, in one
transaction.

Neither database has UPDATE ... RETURNING (MariaDB's INSERT ... RETURNING is not MySQL's),
so jobq uses no RETURNING here at all:

- capture picks ids FOR UPDATE SKIP LOCKED, updates those rows and reads them back, in
  one transaction; concurrent captures skip each other's rows;
- inserts take their ids from LAST_INSERT_ID. A multi-row INSERT ... VALUES is a "simple
  insert", whose ids InnoDB allocates together in every auto-increment lock mode (an
  INSERT ... SELECT may interleave with concurrent inserts in mode 2, MySQL 8's default);
- partial indexes are emulated (mysql_ddl): queries name the flag column (within);
- a single-table UPDATE assigns left to right, each expression seeing the columns already
  set: assignments that read a column come before the assignment of that column.

Engines jobq creates use READ COMMITTED, which takes no gap locks on the rows a capture
scans; everything is also correct under REPEATABLE READ. A deadlock aborts the whole
transaction (error 1213), and Database.write runs it again.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.dialects import mysql
from sqlalchemy.engine import Connection, Engine

from jobq.db.errors import JobqError, MissingExtra
from jobq.db.payload import encode_args_array
from jobq.db.prepared import Prepared
from jobq.db.room import Room
from jobq.db.tasks import Status
from jobq.dialects import mysql_errors
from jobq.dialects.base import Dialect
from jobq.dialects.fair import picked_ids, picked_params
from jobq.dialects.mysql_ddl import partial_index_column
from jobq.dialects.mysql_fair import WalkFairRows
from jobq.dialects.mysql_inserts import Rows, driver_cursor
from jobq.dialects.mysql_updates import ordered_update
from jobq.dialects.schema import locks, tasks
from jobq.dialects.upserts import UpsertKey, key_columns

c = tasks.c

#: JSON_TABLE column types for the fields of json_records.
_JSON_TABLE_TYPES: tuple[tuple[type, str], ...] = (
    (sa.BigInteger, "BIGINT"),
    (sa.Integer, "INT"),
    (sa.Float, "DOUBLE"),
    (sa.Text, "LONGTEXT"),
    (sa.String, "VARCHAR(255)"),
)


# Bytes of a packet kept for the statement around its parameters.
_STATEMENT_ROOM = 64 * 1024


class MySQLDialect(WalkFairRows, Dialect):
    name = "mysql"
    aliases = ("mysql", "mariadb")
    capture_is_one_statement = False

    def __init__(self) -> None:
        super().__init__()
        # @@auto_increment_increment: the step between the ids of one multi-row insert.
        self._id_step: int | None = None
        # @@max_allowed_packet: the largest statement the server takes (see room()).
        self._max_packet: int | None = None
        self._room: Room | None = None
        self._id_step_lock = threading.Lock()

    # --- engine ---------------------------------------------------------------------

    def normalize_url(self, url: sa.URL) -> sa.URL:
        # PyMySQL is the driver of jobq[mysql]; plain mysql:// and mariadb:// mean it.
        if url.drivername in ("mysql", "mariadb"):
            return url.set(drivername=f"{url.drivername}+pymysql")
        return url

    def missing_driver(self, url: sa.URL) -> JobqError | None:
        if url.get_driver_name() == "pymysql":
            return MissingExtra(feature="MySQL through PyMySQL", extra="mysql")
        return None

    def engine_options(self, url: sa.URL) -> dict[str, Any]:
        # READ COMMITTED: a capture's scan locks only the rows it takes, and no gaps that
        # would hold up concurrent enqueues. Recycling stays under the server's
        # wait_timeout (8 hours by default), after which it drops idle connections.
        options: dict[str, Any] = {"isolation_level": "READ COMMITTED", "pool_recycle": 3600}
        if url.get_driver_name() == "pymysql":
            options["connect_args"] = {"conv": _pymysql_conversions()}
        return options

    def configure_engine(self, engine: Engine) -> None:
        if not event.contains(engine, "checkout", self._learn_id_step):
            event.listen(engine, "checkout", self._learn_id_step)

    def _learn_id_step(self, dbapi_connection: Any, _record: Any, _proxy: Any) -> None:
        if self._id_step is None:
            self._read_id_step(dbapi_connection.cursor())

    def _read_id_step(self, cursor: Any) -> None:
        """Learn @@auto_increment_increment and @@max_allowed_packet, once, on the driver
        ``cursor`` (then closed)."""
        try:
            with self._id_step_lock:
                if self._id_step is None:
                    cursor.execute("SELECT @@auto_increment_increment, @@max_allowed_packet")
                    step, packet = cursor.fetchone()
                    self._max_packet = int(packet)
                    self._id_step = int(step)
        finally:
            cursor.close()

    def room(self, engine: Engine) -> Room:
        if self._room is None:  # every enqueue asks: build it once
            if self._max_packet is None:
                with engine.connect():
                    pass  # its checkout learns the packet size (_learn_id_step)
            packet = self._max_packet
            assert packet is not None
            # The statement around the parameters, and the protocol's headers, need room.
            self._room = Room(
                max(packet - _STATEMENT_ROOM, packet // 2),
                f"MySQL's max_allowed_packet is {packet:,} bytes",
                escaped=True,
            )
        return self._room

    def batch_bytes(self, batch: Any, room: Room, row_bytes: int) -> int:
        return sum(room.size(args) for args in batch) + row_bytes * len(batch)

    def prepare_raw(self, raw: Any) -> None:
        raw.autocommit(True)  # each statement Database.run sends is atomic on its own

    def raw_commit(self, raw: Any) -> None:
        pass  # autocommit: the statement committed itself; COMMIT would cost a round trip

    # --- clock ----------------------------------------------------------------------

    def now(self) -> sa.ColumnElement[Any]:
        # UTC_TIMESTAMP, not NOW(): DATETIME has no time zone and jobq stores UTC. It is
        # fixed at the start of each statement (not of the transaction).
        return sa.func.utc_timestamp(sa.literal_column("6"), type_=sa.DateTime())

    def now_plus(self, seconds: sa.ColumnElement[Any] | float) -> sa.ColumnElement[Any]:
        if isinstance(seconds, sa.ColumnElement):
            microseconds: Any = sa.func.round(seconds * 1_000_000)
        else:
            microseconds = round(seconds * 1_000_000)
        return sa.func.timestampadd(
            sa.literal_column("MICROSECOND"), microseconds, self.now(), type_=sa.DateTime()
        )

    # --- predicates -----------------------------------------------------------------

    def within(self, index: str, columns: Any = c) -> sa.ColumnElement[bool]:
        # The emulated partial index leads with its flag column: name it, or the index
        # is of no use (neither MariaDB nor MySQL infers it from the condition).
        table = columns.id.table  # the tasks table, or an alias of it
        flag = sa.literal_column(f"{table.name}.{partial_index_column(index)}", sa.Integer)
        return flag == sa.literal_column("1")

    # --- writes ---------------------------------------------------------------------

    def new_row_values(self, timing: str, extra: tuple[str, ...] = ()) -> dict[str, Any]:
        # The constants inline: a multi-row insert would otherwise bind them once per row.
        return {
            **super().new_row_values(timing, extra),
            "status": sa.literal_column(f"'{Status.QUEUED.value}'", sa.String),
            "attempt": sa.literal_column("0", sa.Integer),
            "recurring": sa.false(),
        }

    def insert_statement(self, timing: str, extra: tuple[str, ...] = ()) -> sa.Executable:
        return sa.insert(tasks).values(
            **self.new_row_values(timing, extra), args=sa.bindparam("new_args", type_=c.args.type)
        )

    def insert_many_statement(self, timing: str, extra: tuple[str, ...] = ()) -> sa.Executable:
        # One row, whose VALUES bind_batch repeats once per task (see mysql_inserts.Rows).
        return sa.insert(tasks).values(
            **self.new_row_values(timing, extra), args=sa.bindparam("new_args", type_=sa.Text)
        )

    def encode_batch(
        self, task: str, args_list: Sequence[Mapping[str, Any] | None], room: Room, first: int
    ) -> Any:
        return [
            encode_args_array(task, [args], room, first + index)[1:-1]
            for index, args in enumerate(args_list)
        ]

    def bind_batch(
        self, insert: Prepared, params: dict[str, Any], batch: Any
    ) -> tuple[Prepared, dict[str, Any]]:
        return Rows(insert, len(batch)), {**params, "args_list": batch}  # type: ignore[return-value]

    def inserted_ids(self, cursor: Any) -> list[int]:
        count, first = cursor.rowcount, cursor.lastrowid
        if count <= 1:
            return [first] if count == 1 else []
        if self._id_step is None:
            self._read_id_step(driver_cursor(cursor))
        assert self._id_step is not None
        return list(range(first, first + count * self._id_step, self._id_step))

    def insert_unique(
        self, conn: Connection, timing: str, params: dict[str, Any], extra: tuple[str, ...] = ()
    ) -> int | None:
        # On a duplicate of the (emulated) unique index, LAST_INSERT_ID(id) makes the
        # holder's id the one the statement reports: insert-or-find in one statement,
        # reading the current row even inside a caller's REPEATABLE READ snapshot.
        stmt = self.memo(
            ("insert unique", timing, extra),
            lambda: (
                mysql.insert(tasks)
                .values(
                    **self.new_row_values(timing, extra),
                    args=sa.bindparam("new_args", type_=c.args.type),
                )
                .on_duplicate_key_update(id=sa.func.last_insert_id(c.id))
            ),
        )
        return conn.execute(stmt, params).lastrowid

    def upsert_statement(
        self,
        table: sa.Table,
        key: UpsertKey,
        values: dict[str, Any],
        update: dict[str, Any] | None = None,
        where: sa.ColumnElement[bool] | None = None,
    ) -> sa.Insert:
        if where is not None:
            # ON DUPLICATE KEY UPDATE has no WHERE; claim_lock does conditional takeovers.
            raise NotImplementedError("a conditional upsert on MySQL: see claim_lock")
        if update is None:
            names = {column.name for column in key_columns(key)}
            update = {name: value for name, value in values.items() if name not in names}
        return mysql.insert(table).values(**values).on_duplicate_key_update(**update)

    def json_from_text(self, text: sa.ColumnElement[Any]) -> sa.ColumnElement[Any]:
        return text  # a JSON column takes JSON text as it is

    def json_records(
        self, array: sa.BindParameter[str], fields: Sequence[tuple[str, Any]]
    ) -> sa.FromClause:
        # Names and types are jobq's own constants (run_end.COMPLETION_FIELDS).
        columns = ", ".join(
            f"{name} {_json_table_type(type_)} PATH '$.{name}'" for name, type_ in fields
        )
        records = sa.text(
            f"SELECT * FROM JSON_TABLE(:{array.key}, '$[*]' COLUMNS ({columns})) AS each_record"
        )
        return (
            records.bindparams(array)
            .columns(*[sa.column(name, type_) for name, type_ in fields])
            .subquery("record")
        )

    def id_among(self, ids: sa.Select[Any]) -> sa.ColumnElement[bool]:
        # The UPDATE joins the records on the primary key already; an IN (SELECT ...) of
        # them would be run once per row of the table.
        return sa.true()

    def capture_branch(self, rows: sa.Select[Any], name: str) -> sa.Select[Any]:
        # Each member of the UNION locks what it read; a row locked but not taken (an
        # expired run outranked it) is free again at the capture's commit.
        return rows.with_for_update(skip_locked=True)

    def capture_rows(
        self,
        conn: Connection,
        queue_count: int | None,
        named_leases: int | None,
        unlimited_only: bool,
        params: dict[str, Any],
    ) -> Sequence[Sequence[Any]]:
        pick = self._prepared(
            conn,
            ("capture pick", queue_count, unlimited_only),
            lambda: self.capturable_ids(self.now(), queue_count, unlimited_only),
        )
        ids = [row[0] for row in _run(conn, pick, params)]

        def values() -> dict[str, Any]:
            now = self.now() if unlimited_only else self.clock()
            return self.capture_values(named_leases=named_leases, now=now)

        return self._take_ids(conn, ids, ("capture", named_leases, unlimited_only), values, params)

    def capture_ids(
        self,
        conn: Connection,
        ids: Sequence[int],
        named_leases: int | None,
        params: dict[str, Any],
    ) -> Sequence[Sequence[Any]]:
        return self._take_ids(
            conn, list(ids), ("fair", named_leases),
            lambda: self.fair_capture_values(named_leases), params,
        )  # fmt: skip

    def _take_ids(
        self,
        conn: Connection,
        ids: list[int],
        shape: tuple[Any, ...],
        values: Callable[[], dict[str, Any]],
        params: dict[str, Any],
    ) -> Sequence[Sequence[Any]]:
        """Capture the rows ``ids`` (locked) with the SET clause ``values()`` and read them."""
        if not ids:
            return []
        # IN lists of a few fixed widths, padded with the last id: a handful of statement
        # shapes for any limit. (An IN (SELECT ...) would scan the table on MariaDB.)
        width, picked = picked_ids(ids)
        take = self._prepared(
            conn,
            ("capture take", *shape, width),
            lambda: ordered_update(
                sa.update(tasks).where(c.id.in_(picked_params(width))), values()
            ),
        )
        conn.exec_driver_sql(take.sql, take.parameters({**params, **picked}))
        read = self._prepared(
            conn,
            ("capture read", width),
            lambda: sa.select(tasks).where(c.id.in_(picked_params(width))),
        )
        return _run(conn, read, picked)

    def _prepared(self, conn: Connection, key: Any, build: Any) -> Prepared:
        return self.memo(("prepared", key), lambda: Prepared(build(), conn.dialect))

    def update_returning_ids(
        self, conn: Connection, stmt: sa.Update, params: dict[str, Any]
    ) -> set[int]:
        # Lock the rows it will change, then change exactly those (they cannot change
        # meanwhile, nor can others start to match: its WHERE names runs by attempt).
        locking = self.memo(
            ("locking ids", stmt),
            lambda: sa.select(c.id).where(stmt.whereclause).with_for_update(),  # type: ignore[arg-type]
        )
        ids = set(conn.execute(locking, params).scalars())
        if ids:
            conn.execute(stmt, params)
        return ids

    # --- wake-up --------------------------------------------------------------------
    # No LISTEN / NOTIFY: workers poll (Dialect.listen returns False).

    # --- errors ---------------------------------------------------------------------

    # By the server's error numbers (mysql_errors.py).
    is_missing_schema = mysql_errors.is_missing_schema
    is_too_large = mysql_errors.is_too_large
    is_lock_key_conflict = mysql_errors.is_lock_key_conflict
    is_conflict = mysql_errors.is_conflict
    is_unsent = mysql_errors.is_unsent
    heard_while_idle = mysql_errors.heard_while_idle

    # --- locks ----------------------------------------------------------------------

    def claim_lock_statement(
        self,
        values: dict[str, Any],
        takeover: dict[str, Any],
        when: sa.ColumnElement[bool],
    ) -> Any:
        # Take the row over where ``when`` holds, else insert it: an INSERT that finds the
        # name taken fails alone (InnoDB rolls back the statement, not the transaction).
        name = locks.c.name == values["name"]
        take = ordered_update(sa.update(locks).where(name, when), takeover)
        return take, sa.insert(locks).values(**values)

    def claim_lock(self, conn: Connection, claim: Any, params: dict[str, Any]) -> bool:
        take, insert = claim
        # SQLAlchemy connects with CLIENT_FOUND_ROWS: the rowcount counts matched rows.
        if conn.execute(take, params).rowcount:
            return True
        try:
            conn.execute(insert, params)
        except sa.exc.IntegrityError as error:
            if mysql_errors.is_duplicate_key(error):
                return False  # held, and not ours to take over
            raise
        return True

    def migration_lock_statements(self) -> tuple[str, str]:
        # GET_LOCK belongs to the session, so it outlives the implicit commit of every DDL
        # statement; one per database (names are server-wide, and at most 64 characters).
        name = "LEFT(CONCAT('jobq_migrate.', COALESCE(DATABASE(), '')), 64)"
        return f"SELECT GET_LOCK({name}, %(wait)s)", f"SELECT RELEASE_LOCK({name})"


def _pymysql_conversions() -> dict[Any, Any]:
    """PyMySQL's conversions, but DATETIME parsed by datetime.fromisoformat (in C): reading
    captured rows back spent most of its time in PyMySQL's pure-Python parser."""
    from pymysql import converters
    from pymysql.constants import FIELD_TYPE

    def to_datetime(value: Any) -> Any:
        try:
            return datetime.fromisoformat(value)
        except (TypeError, ValueError):  # zero dates and other oddities: as PyMySQL does
            return converters.convert_datetime(value)

    return {**converters.conversions, FIELD_TYPE.DATETIME: to_datetime}


def _run(conn: Connection, prepared: Prepared, values: Mapping[str, Any]) -> Sequence[Any]:
    """Run ``prepared`` on ``conn``; its rows as the driver gives them."""
    return conn.exec_driver_sql(prepared.sql, prepared.parameters(values)).fetchall()


def _json_table_type(type_: Any) -> str:
    for kind, spelling in _JSON_TABLE_TYPES:
        if isinstance(type_, kind):
            return spelling
    raise TypeError(f"no JSON_TABLE type for {type_!r}")
