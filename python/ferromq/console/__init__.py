"""`ferromq console`: a read-only web console over the name server (server-rendered pages, one
small script for the throughput chart; no build step). Needs the `console` extra
(`pip install 'ferromq[console]'`: aiohttp and Jinja2)."""

from ferromq.console.app import make_app, start_console

__all__ = ["make_app", "start_console"]
