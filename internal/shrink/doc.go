// Package shrink has containers that give their memory back as they
// empty. Go's maps keep the buckets of the most entries they ever held,
// and a slice resliced from its front keeps its whole array: a structure
// of the library that once held an entry per lock name of a busy moment
// (a million names) would keep that memory for the life of the Client.
// Map and Queue keep at most about four times what they hold now (and a
// small floor), and nothing once empty.
//
// They are building blocks of the module, not safe for concurrent use:
// their owners guard them with their own locks.
package shrink

// floor is the size under which a container is not rebuilt smaller: a
// rebuild would copy more often than it saves.
const floor = 64
