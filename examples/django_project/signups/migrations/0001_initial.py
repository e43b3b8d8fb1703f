"""The table of sign-ups."""

from django.db import migrations, models


class Migration(migrations.Migration):
    """Create the table of sign-ups."""

    initial = True

    dependencies: list[tuple[str, str]] = []

    operations = [
        migrations.CreateModel(
            name="Signup",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False)),
                ("email", models.EmailField(max_length=254)),
                ("welcomed", models.BooleanField(default=False)),
            ],
        ),
    ]
