// Command orders runs the order desk (package desk) on Turnpike:
//
//	go run . devstack   # the whole pipeline in one process
//	go run .            # a worker on TURNPIKE_KAFKA_BROKERS and TURNPIKE_MONGO_URI
//
// Settings are cmd/devstack's or cmd/worker's flags and TURNPIKE_*
// environment variables (-h lists them).
package main

import (
	"os"

	"github.com/turnpike-dev/turnpike/examples/orders/desk"
	"github.com/turnpike-dev/turnpike/pkg/devstack"
	"github.com/turnpike-dev/turnpike/pkg/worker"
)

func main() {
	opts := desk.Options(desk.SampleTable())
	if len(os.Args) > 1 && os.Args[1] == "devstack" {
		os.Args = append(os.Args[:1], os.Args[2:]...)
		devstack.Main(opts...)
	}
	worker.Main(opts...)
}
