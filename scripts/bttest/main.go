// A Bigtable emulator from Go's in-memory bttest server, for machines without the Google Cloud
// CLI's cbtemulator. Same flags and the same banner line as cbtemulator.
package main

import (
	"flag"
	"fmt"
	"log"

	"cloud.google.com/go/bigtable/bttest"
)

func main() {
	host := flag.String("host", "127.0.0.1", "address to listen on")
	port := flag.Int("port", 9000, "port to listen on (0 picks a free one)")
	flag.Parse()
	srv, err := bttest.NewServer(fmt.Sprintf("%s:%d", *host, *port))
	if err != nil {
		log.Fatalf("cannot start the emulator: %v", err)
	}
	fmt.Printf("Cloud Bigtable emulator running on %s\n", srv.Addr)
	select {}
}
