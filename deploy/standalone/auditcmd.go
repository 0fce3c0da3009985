package standalone

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/google/uuid"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readconcern"

	"github.com/pinion-health/pinion/pkg/audit"
	"github.com/pinion-health/pinion/pkg/config"
	"github.com/pinion-health/pinion/pkg/dirlock"
	"github.com/pinion-health/pinion/pkg/embedded"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/store"
	"github.com/pinion-health/pinion/pkg/store/mongostore"
	"github.com/pinion-health/pinion/pkg/store/sqlstore"
)

// AuditUsage is how `pinion audit` is called.
const AuditUsage = "usage: pinion audit verify <project-id> | _ | --all"

// The exit codes of `pinion audit verify`.
const (
	AuditWhole  = 0 // every chain verified is whole
	AuditBroken = 1 // a chain is broken
	AuditFailed = 2 // the command could not say (usage, an unreadable store)
)

// serverTrail names the server's own trail (events of no project) on the
// command line and in its output.
const serverTrail = "_"

// AuditCommand runs `pinion audit verify`: it opens the configured store
// itself (no NATS, no service: Pinion may be running or stopped), walks
// the chains asked for, and writes a line per project to out. It answers
// the process's exit code.
func AuditCommand(ctx context.Context, cfg *config.Config, args []string, out, errOut io.Writer, log *slog.Logger) int {
	if len(args) != 2 || args[0] != "verify" {
		fmt.Fprintln(errOut, AuditUsage)
		return AuditFailed
	}
	which := args[1]
	if which != "--all" && which != serverTrail && uuid.Validate(which) != nil {
		fmt.Fprintf(errOut, "pinion audit verify: %q is not a project id (a UUID), _ or --all\n%s\n", which, AuditUsage)
		return AuditFailed
	}
	ctx, cancel := context.WithTimeout(ctx, time.Hour) // a chain of millions of events, read one by one
	defer cancel()
	r, closeStore, err := openAuditStore(ctx, cfg, log)
	if err != nil {
		fmt.Fprintln(errOut, "pinion audit verify:", err)
		return AuditFailed
	}
	defer closeStore()

	// The key the checkpoints are signed with, to compare with the one
	// noted before: a chain rewritten and signed again shows a new key.
	if key, err := audit.PublicKey(ctx, r); err != nil {
		fmt.Fprintln(errOut, "pinion audit verify:", err)
		return AuditFailed
	} else if key != nil {
		fmt.Fprintln(out, "key", audit.KeyText(key))
	}
	code := AuditWhole
	verify := func(project string, always bool) error {
		rep, err := audit.Verify(ctx, r, project)
		if err != nil {
			return fmt.Errorf("project %s: %w", trailName(project), err)
		}
		if !always && rep.Whole && rep.Events == 0 && rep.From == 1 {
			return nil // no trail
		}
		fmt.Fprintln(out, reportLine(rep))
		if !rep.Whole {
			code = AuditBroken
		}
		return nil
	}
	switch which {
	case "--all":
		err = audit.Projects(ctx, r, func(project string) error { return verify(project, project == "") })
	case serverTrail:
		err = verify("", true)
	default:
		err = verify(which, true)
	}
	if err != nil {
		fmt.Fprintln(errOut, "pinion audit verify:", err)
		return AuditFailed
	}
	return code
}

func trailName(project string) string {
	if project == "" {
		return serverTrail
	}
	return project
}

// reportLine is one project's verdict, on one line a script can read:
// the project, then "whole" or "broken", then the facts.
func reportLine(rep *audit.Report) string {
	if rep.Whole {
		return fmt.Sprintf("%s whole events=%d from=%d head=%d", trailName(rep.Project), rep.Events, rep.From, rep.Head.Seq)
	}
	b := rep.Break
	return fmt.Sprintf("%s broken seq=%d id=%s problem=%q events=%d from=%d",
		trailName(rep.Project), b.Seq, b.ID, b.Problem, rep.Events, rep.From)
}

// openAuditStore opens the store the settings name, as `make run` does,
// for reading only:
//   - SQLite (the default) is opened read-only: SQLite's write-ahead log
//     lets this process read while Pinion writes, so the command runs
//     beside a running Pinion as well as a stopped one, and changes
//     nothing either way.
//   - An embedded FerretDB (PINION_STORE=ferretdb) is a server: if Pinion
//     holds the data directory, the command connects to the one Pinion
//     runs; if not, it starts one itself and holds the directory while it
//     reads, so that Pinion does not start on it meanwhile.
//   - An external MongoDB (PINION_MONGODB_URI) is connected to.
func openAuditStore(ctx context.Context, cfg *config.Config, log *slog.Logger) (*repo.Repo, func(), error) {
	var (
		st      store.Store
		closers []func()
	)
	closeAll := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	fail := func(err error) (*repo.Repo, func(), error) {
		closeAll()
		return nil, nil, err
	}
	switch {
	case cfg.MongoURI != "" || cfg.Store == "ferretdb":
		uri := cfg.MongoURI
		if uri == "" {
			lock, err := dirlock.Acquire(cfg.DataDir)
			var held *dirlock.HeldError
			switch {
			case errors.As(err, &held):
				// Pinion runs, with its FerretDB: read through it.
				if uri, err = embedded.FerretURI(embedded.FerretOptions{Dir: filepath.Join(cfg.DataDir, "db"), Addr: cfg.FerretListen}); err != nil {
					return fail(err)
				}
			case err != nil:
				return fail(err)
			default:
				closers = append(closers, func() { _ = lock.Release() })
				f, err := startFerretDB(cfg, log)
				if err != nil {
					return fail(err)
				}
				closers = append(closers, f.Close)
				uri = f.URI
			}
		}
		client, err := mongo.Connect(options.Client().ApplyURI(uri).SetAppName("pinion-audit").
			SetReadConcern(readconcern.Majority()).SetTimeout(30 * time.Second))
		if err != nil {
			return fail(fmt.Errorf("mongodb: %w", err))
		}
		closers = append(closers, func() {
			dctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = client.Disconnect(dctx)
		})
		if st, err = mongostore.Open(ctx, client.Database(cfg.MongoDatabase), mongostore.Options{Log: log}); err != nil {
			return fail(fmt.Errorf("mongodb at %s: %w", uri, err))
		}
	default:
		s, err := sqlstore.Open(ctx, filepath.Join(cfg.DataDir, "pinion.db"), sqlstore.Options{ReadOnly: true, Log: log})
		if err != nil {
			return fail(fmt.Errorf("%w (PINION_DATA_DIR is %s)", err, cfg.DataDir))
		}
		st = s
		closers = append(closers, func() { _ = s.Close() })
	}
	// No NATS: nothing is written, and no other instance's write need
	// reach this short-lived cache.
	r, err := repo.New(st, nil, repo.Options{Log: log})
	if err != nil {
		return fail(err)
	}
	closers = append(closers, r.Close)
	return r, closeAll, nil
}
