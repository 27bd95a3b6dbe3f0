"""The chat's widgets and screens."""
