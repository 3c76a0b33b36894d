// The target only makes <malloc.h> visible to Swift.
