package service

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"

	"github.com/turnpike-dev/turnpike/internal/server"
)

// ServePprof serves the runtime profiles of net/http/pprof on addr until
// ctx ends. An empty addr serves nothing and returns when ctx ends.
func ServePprof(ctx context.Context, addr string, log *slog.Logger) error {
	if addr == "" {
		<-ctx.Done()
		return nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("pprof: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	log.Info("pprof listening", slog.String("addr", ln.Addr().String()))
	return server.Serve(ctx, ln, mux, shutdownGrace)
}
