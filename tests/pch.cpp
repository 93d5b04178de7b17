// Carries the precompiled header that every test object reuses.
