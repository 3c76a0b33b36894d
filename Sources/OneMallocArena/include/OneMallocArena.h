// Nothing to call: the target's constructor sets glibc's arena limit (one_arena.c).
