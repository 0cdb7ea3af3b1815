"""Writers for the agent runtime (pauses) and for people and UIs (answers)."""
