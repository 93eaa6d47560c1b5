package router

// NewUpstreamBatch returns a batch laid out in a buffer of its own
// (newUpstreamBatch without an allocator), as UpstreamBatches.New does
// when none is free.
func NewUpstreamBatch(frameLen, n, idLen int) *UpstreamBatch {
	return newUpstreamBatch(nil, frameLen, n, idLen)
}
