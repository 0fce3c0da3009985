package access

// A policy's criteria are checked in two ways. Searches push the condition
// into the store's query. Reads and writes check one resource in memory
// against the same condition (store.Matches), with the resource's search
// fields computed by search.Fields: a write must be checked before it is
// stored, so the database cannot answer for the new content, and one way
// for reads and writes keeps them consistent. store.Matches is the
// semantics every adapter's search is held to by the conformance suite, so
// the two evaluations cannot silently disagree.
