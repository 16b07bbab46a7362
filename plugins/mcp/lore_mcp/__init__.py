"""Lore's MCP server: recall, knowledge and the event log as MCP tools, over stdio
(``lore mcp``) and streamable HTTP (``/mcp`` on the gateway). See docs/mcp.md."""
