"""The dashboard in the project's URLconf, behind Django's staff login."""

from __future__ import annotations

import re

from django.contrib.auth.models import User
from django.test import Client
from shop import tasks


def staff() -> Client:
    user = User.objects.create_user("ops", password="secret", is_staff=True)
    client = Client()
    client.force_login(user)
    return client


def test_anonymous_and_non_staff_users_go_to_the_login() -> None:
    answer = Client().get("/jobq/")
    assert answer.status_code == 302 and answer["Location"] == "/admin/login/?next=/jobq/"
    user = User.objects.create_user("shopper", password="secret")
    client = Client()
    client.force_login(user)
    assert client.get("/jobq/tasks").status_code == 302


def test_staff_see_pages_with_links_and_static_files_under_the_prefix() -> None:
    client = staff()
    result = tasks.add.enqueue(1, 2)
    page = client.get("/jobq/")
    assert page.status_code == 200 and b"/jobq/static/" in page.content
    detail = client.get(f"/jobq/tasks/{result.id}")
    assert detail.status_code == 200 and b"shop.tasks.add" in detail.content
    style = re.search(rb'href="(/jobq/static/[^"]+\.css)"', page.content)
    assert style is not None and client.get(style.group(1).decode()).status_code == 200


def test_an_action_needs_the_dashboards_csrf_token() -> None:
    client = staff()
    result = tasks.add.enqueue(1, 2)
    detail = client.get(f"/jobq/tasks/{result.id}")
    token = re.search(rb'name="csrf" value="([^"]+)"', detail.content)
    assert token is not None
    refused = client.post(f"/jobq/tasks/{result.id}/cancel", {"confirm": "yes"})
    assert refused.status_code == 403
    assert tasks.add.get_result(result.id).status == "READY"
    done = client.post(
        f"/jobq/tasks/{result.id}/cancel", {"csrf": token.group(1).decode(), "confirm": "yes"}
    )
    assert done.status_code in (302, 303)
    cancelled = tasks.add.get_result(result.id)
    assert cancelled.status == "FAILED"
    assert cancelled.errors[0].exception_class_path == "jobq.db.errors.TaskCancelled"
