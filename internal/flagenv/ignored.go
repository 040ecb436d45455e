package flagenv

import "time"

// Ignore registers the shared settings named in names that a command
// accepts but does not read, so that one command line (or environment)
// serves every Turnpike part: cmd/pushgw takes -mongo-uri and ignores it.
// Their values are parsed (a bad environment value is still an error) and
// dropped. Names not listed here are skipped.
func Ignore(set *Set, names ...string) {
	for _, n := range names {
		switch n {
		case "mongo-uri":
			set.String(new(string), n, "TURNPIKE_MONGO_URI", "", "MongoDB connection string")
		case "mongo-db":
			set.String(new(string), n, "TURNPIKE_MONGO_DB", "turnpike", "MongoDB database")
		case "mongo-pool":
			set.Int(new(int), n, "TURNPIKE_MONGO_POOL", 0, "most connections (commands in flight) of the MongoDB client; 0: the driver's default, 100")
		case "model":
			set.String(new(string), n, "TURNPIKE_MODEL", "echo", "model: echo or openai")
		case "echo-delay": // pkg/echo's DefaultDelay
			set.Duration(new(time.Duration), n, "TURNPIKE_ECHO_DELAY", 20*time.Millisecond, "per-token delay of the echo model")
		case "openai-base-url":
			set.String(new(string), n, "TURNPIKE_OPENAI_BASE_URL", "", "base URL of an OpenAI-compatible API")
		case "openai-api-key":
			set.String(new(string), n, "TURNPIKE_OPENAI_API_KEY", "", "API key of the OpenAI-compatible API")
		case "openai-model":
			set.String(new(string), n, "TURNPIKE_OPENAI_MODEL", "", "model name at the OpenAI-compatible API")
		case "otlp-endpoint":
			set.String(new(string), n, "TURNPIKE_OTLP_ENDPOINT", "", "OTLP/HTTP endpoint of trace spans, e.g. http://otel-collector:4318 (off when empty)")
		case "trace-sample-ratio":
			set.Float(new(float64), n, "TURNPIKE_TRACE_SAMPLE_RATIO", 1, "share of new traces sampled, 0..1")
		}
	}
}
