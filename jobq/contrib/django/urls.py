"""The dashboard's URLs: ``path("jobq/", include("jobq.contrib.django.urls"))`` serves the
jobq database of the TASKS backend "default" at /jobq/ to staff users (others go to the
admin's login). For another backend, route to ``dashboard`` with ``{"backend": alias}``."""

from django.urls import path, re_path

from jobq.contrib.django.dashboard import dashboard

app_name = "jobq"
urlpatterns = [
    path("", dashboard, name="dashboard"),
    re_path(r"^(?P<path>.+)$", dashboard),
]
