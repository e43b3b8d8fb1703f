"""``manage.py pgqueue``."""
