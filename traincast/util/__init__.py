"""Utilities below every layer: executors, file I/O, user regexes, display helpers, allocator hints."""
