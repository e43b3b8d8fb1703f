"""The table of task results (:class:`pgqueue.contrib.django.models.TaskResultRecord`)."""

from django.db import migrations, models  # type: ignore[import-untyped]


class Migration(migrations.Migration):  # type: ignore[misc]
    """Create the table of task results."""

    initial = True

    dependencies: list[tuple[str, str]] = []

    operations = [
        migrations.CreateModel(
            name="TaskResultRecord",
            fields=[
                ("job_id", models.BigIntegerField(primary_key=True, serialize=False)),
                ("return_value", models.JSONField(default=None, null=True)),
                ("errors", models.JSONField(default=list)),
                ("finished_at", models.DateTimeField(default=None, null=True)),
            ],
            options={"db_table": "pgqueue_django_results", "verbose_name": "task result"},
        ),
    ]
