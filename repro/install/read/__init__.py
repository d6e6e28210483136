"""The bundle read: into a staging directory beside the target, verified there, and the
members unpack reads of it, each checked."""
