"""The event log and packs (MISSION section 8): agents outside the proxy write to and read
from a project's memory."""
