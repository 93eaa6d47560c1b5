package core

import "strconv"

// DropReason says why muxd dropped a message instead of delivering it.
// Each reason has its own series of muxd_dropped_total.
type DropReason uint8

const (
	DropUnknownID             DropReason = iota // response id matches no pending request (late, duplicate, foreign)
	DropNullID                                  // response with id null: a protocol error from the node
	DropUnknownSubscription                     // push for a subscription nobody holds
	DropMalformed                               // upstream frame that is not valid JSON, or message that can be read more than one way (router.ErrAmbiguous)
	DropUnexpected                              // upstream message that is neither a response nor a push
	DropNoUpstream                              // client notification while no upstream is connected, or once shut (Core.Shutdown)
	DropSubscribeNotification                   // client eth_subscribe/eth_unsubscribe (or another namespace's) sent without an id
	DropIgnoredNotification                     // client notification the node would not run as muxd reads it (router.Message.Ignored)
	DropClientGone                              // answer to a call whose client left while the node ran it
	NumDropReasons
)

func (r DropReason) String() string {
	switch r {
	case DropUnknownID:
		return "unknown_id"
	case DropNullID:
		return "null_id"
	case DropUnknownSubscription:
		return "unknown_subscription"
	case DropMalformed:
		return "malformed"
	case DropUnexpected:
		return "unexpected"
	case DropNoUpstream:
		return "no_upstream"
	case DropSubscribeNotification:
		return "subscribe_notification"
	case DropIgnoredNotification:
		return "ignored_notification"
	case DropClientGone:
		return "client_gone"
	}
	return "reason_" + strconv.Itoa(int(r))
}

// drop counts a dropped message and notes it for the log.
func (c *Core) drop(e *Effects, r DropReason, msg string, args ...any) {
	c.obs.Dropped(r)
	e.Notes = append(e.Notes, Note{Drop: true, Reason: r, Msg: msg, Args: args})
}

// note adds a warning for the log.
func (e *Effects) note(msg string, args ...any) {
	e.Notes = append(e.Notes, Note{Msg: msg, Args: args})
}

// noteLimited adds a warning of kind k, one a client can cause as often as
// it likes: the shell limits how often it is logged (Note.Limited).
func (e *Effects) noteLimited(k LimitedNote, msg string, args ...any) {
	e.Notes = append(e.Notes, Note{Limited: k, Msg: msg, Args: args})
}

// info adds an informational line for the log.
func (e *Effects) info(msg string, args ...any) {
	e.Notes = append(e.Notes, Note{Info: true, Msg: msg, Args: args})
}
