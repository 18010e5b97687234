"""The documentation's own tests: every snippet runs, and the site builds and is complete."""
