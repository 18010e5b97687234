"""The management commands of jobq.contrib.django."""
