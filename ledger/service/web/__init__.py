"""The reviewer's pages: server-rendered Jinja2, SVG drawn on the server, one
stylesheet served by the ledger itself (no script, no font, no CDN)."""
