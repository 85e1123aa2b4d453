package open

import (
	"context"
	"fmt"

	"github.com/autodiag/autodiag/agent/config"
	"github.com/autodiag/autodiag/agent/secret"
)

// Secrets reads refs (cfg.SecretRefs for the agent, fewer for a CLI
// command) with the instance role and the AWS settings of cfg, and returns
// the store that holds them; nil when refs is empty, so embedded mode
// needs no AWS. A
// reference that cannot be read fails the start with an error naming it,
// never its value. The caller keeps the store fresh with Run and reads
// through its Getenv.
func Secrets(ctx context.Context, cfg config.Config, refs []string) (*secret.Store, error) {
	if len(refs) == 0 {
		return nil, nil
	}
	awsCfg, err := AWS(ctx, cfg)
	if err != nil {
		return nil, err
	}
	s := secret.NewStore(secret.NewClients(ctx, awsCfg), refs, secretTimeout)
	if _, err := s.Refresh(ctx); err != nil {
		return nil, fmt.Errorf("secrets: %w", err)
	}
	return s, nil
}
