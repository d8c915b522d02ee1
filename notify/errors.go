package notify

import "errors"

// ErrClosed is returned by Watch once Close has started, including to Watch
// calls that were still waiting for their subscription to be confirmed.
var ErrClosed = errors.New("fairlock: notify hub closed")
