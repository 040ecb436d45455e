// Package publicapi links the public packages to each other without
// exporting internal types: pkg/worker sets WorkerConfig when it is
// initialised, and pkg/devstack and pkg/turnpiketest (which import
// pkg/worker, so it is set before they run) turn a worker.Config and
// worker options into the service's configuration with it.
package publicapi

import "github.com/turnpike-dev/turnpike/internal/service"

// WorkerConfig turns cfg (a pkg/worker Config) and opts (a
// []pkg/worker.Option) into the service's worker configuration.
var WorkerConfig func(cfg, opts any) (service.WorkerConfig, error)
