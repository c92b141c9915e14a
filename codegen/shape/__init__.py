"""Shape tracking: symbolic index expressions, Views and ShapeTrackers (stdlib only)."""
