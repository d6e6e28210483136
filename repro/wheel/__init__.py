"""Everything a wheel is, for both sides: RECORD, entry points, scripts, the plans and writers."""
