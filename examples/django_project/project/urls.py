"""The example's URLs."""

from django.urls import path
from signups import views

urlpatterns = [
    path("health", views.health),
    path("signups", views.signup),
    path("signups/rollback", views.signup_rolled_back),
    path("add", views.add_numbers),
    path("broken", views.broken_task),
    path("tasks/<str:result_id>", views.task_result),
]
