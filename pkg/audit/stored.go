package audit

import (
	"context"
	"strings"

	"github.com/pinion-health/pinion/pkg/repo"
)

// Stored reads the seq-th event of project's chain through tr (one
// reader per walk: it keeps the block in hand): its JSON exactly as
// stored (what a sink sends, so that a SIEM can check the chain itself)
// and its link. The place not taken yet is fhir.ErrNotFound; one whose
// event was deleted underneath the API, fhir.ErrGone.
func Stored(ctx context.Context, tr *repo.TrailReader, project string, seq int64) ([]byte, Link, error) {
	raw, err := tr.Event(ctx, project, seq)
	if err != nil {
		return nil, Link{}, err
	}
	l, _, err := linkOf(raw)
	if err != nil {
		return nil, Link{}, err
	}
	return raw, l, nil
}

// First is the first place of project's chain still kept: 1, or the one
// after the events retention removed.
func First(ctx context.Context, r *repo.Repo, project string) (int64, error) {
	l, err := retained(ctx, r, project)
	if err != nil {
		return 0, err
	}
	return l.Seq + 1, nil
}

// ProjectOfSubject is the project whose events a message of the stream
// carries ("" for the server's own), from its subject; false for a
// subject outside the stream's.
func ProjectOfSubject(subject string) (string, bool) {
	end, ok := strings.CutPrefix(subject, SubjectPrefix)
	if !ok || end == "" {
		return "", false
	}
	return projectOf(end), true
}
