package presign

// BinaryID is the id of the Binary an attachment url names, in any form
// Rewrite reads ("Binary/<id>", "<base>fhir/R4/Binary/<id>", either with
// /_history/<vid>, or a storage URL under base, signed or not, current or
// expired): what a client that read a signed URL writes back, as Medplum's
// bot editor writes Bot.executableCode. ok is false for anything else.
func BinaryID(base, u string) (id string, ok bool) {
	rw := &Rewriter{s: &Signer{base: base}}
	id, _, ok = rw.binaryRef(u)
	return id, ok
}
