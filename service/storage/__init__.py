"""The database layer the stages stand on: the SQLite file every store shares and its schema,
the shared state on SQLite or PostgreSQL, the sample tables and their value codec."""
