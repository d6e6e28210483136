"""Patch discovery: every installed file against its distribution's RECORD, through the
scan cache, the pristine content for diffs, and the bundle's patch set made of what
was found and what the workspace keeps."""
