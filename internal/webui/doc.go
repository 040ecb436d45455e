// Package webui is Turnpike's demo chat page and its browser client
// (static/turnpike.js), embedded in the binary: dependency-free ES modules
// and CSS, no build step, no CDN.
//
// Ingest serves the Page at GET / and GET /ui/… (ingest.Deps.Page). The page
// talks to ingest's API on its own origin and to the push gateway's
// WebSocket at Config.StreamURL; in the devstack it signs in through POST
// /v1/dev/token, elsewhere it asks for a token to paste.
//
// A Page is immutable once built and safe for concurrent use.
package webui
