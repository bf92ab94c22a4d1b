"""Database access: pool, embedded server, migrations. Only db/ and store/ import asyncpg."""
