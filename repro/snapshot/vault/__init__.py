"""The wheel vault: which distributions need a wheel in env/wheels, where each wheel
comes from (the original, an index's, a rebuild), hashed and checked."""
