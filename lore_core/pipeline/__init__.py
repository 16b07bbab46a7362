"""The path of one model request through the gateway, a module per phase."""
