package server

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// ShutdownGrace bounds the services' graceful HTTP shutdown (their API,
// ops and pprof servers).
const ShutdownGrace = 10 * time.Second

// ListenPprof opens the listener of ServePprof on addr; an empty addr
// opens none (nil, nil). Services open it before they start anything, so
// that a taken address stops them before any work.
func ListenPprof(addr string) (net.Listener, error) {
	if addr == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("pprof: %w", err)
	}
	return ln, nil
}

// ServePprof serves the runtime profiles of net/http/pprof on ln until ctx
// ends, hardened as every other server is (Serve). A nil ln serves nothing
// and returns when ctx ends.
func ServePprof(ctx context.Context, ln net.Listener, log *slog.Logger) error {
	if ln == nil {
		<-ctx.Done()
		return nil
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	log.Info("pprof listening", slog.String("addr", ln.Addr().String()))
	return Serve(ctx, ln, mux, ShutdownGrace)
}
