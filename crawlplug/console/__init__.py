"""The console: one HTTP API over every crawl of one Redis, with users, roles, an audit log
and CSRF protection (:mod:`.app`, :mod:`.api`, :mod:`.auth`); the users and the audit log
themselves are crawlplug.access's, which the CLI and the dashboard write too."""
