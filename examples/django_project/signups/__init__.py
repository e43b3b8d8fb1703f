"""The example app: sign-ups, and the tasks that welcome them."""
