"""Cron: schedules kept as recurring task rows, and each schedule's last runs."""
