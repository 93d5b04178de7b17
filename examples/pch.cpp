// Carries the precompiled header shared by the examples.
