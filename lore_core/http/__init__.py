"""The HTTP edge: the Quart app and its routes (:mod:`~lore_core.http.app`), the local API
(:mod:`~lore_core.http.api`), who may talk to the gateway (:mod:`~lore_core.http.access`) and
serving with hypercorn (:mod:`~lore_core.http.serve`)."""
