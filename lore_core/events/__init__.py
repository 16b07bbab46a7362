"""The event log and packs (docs/events.md): agents outside the proxy write to and read
from a project's memory."""
