"""Fixtures every test package may ask for."""

# The real PostgreSQL server and the `state_target` fixture that runs a shared-state store's
# tests on SQLite and on PostgreSQL.
pytest_plugins = ("tests.postgres",)
