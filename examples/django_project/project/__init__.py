"""The example Django project: settings, URLs and the WSGI application."""
