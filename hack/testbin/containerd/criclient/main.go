// Command criclient is the test bed's kubelet stand-in: one CRI RuntimeService call
// per exec, against a container runtime's socket, with protobuf JSON in and out, so
// the Python tests drive containerd exactly as the kubelet does (crictl's module is
// not available from the Go module proxy).
//
//	criclient -endpoint unix:///run/x.sock [-timeout 2m] VERB [ARG]
//
//	version                       Version
//	status                        Status (verbose), the call behind NetworkReady
//	runp [-handler H] < config    RunPodSandbox; stdin is a PodSandboxConfig
//	inspectp ID                   PodSandboxStatus (verbose)
//	stopp ID                      StopPodSandbox
//	rmp ID                        RemovePodSandbox
//	pods                          ListPodSandbox
//
// Success: the response as protobuf JSON on stdout, exit 0. A failed call: one
// JSON object {"code": "<grpc code>", "message": "<status message>"} on stdout,
// exit 2. Bad usage: a message on stderr, exit 1.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func usage(msg string) {
	fmt.Fprintln(os.Stderr, "criclient:", msg)
	os.Exit(1)
}

func main() {
	endpoint := flag.String("endpoint", "", "CRI socket, unix:///path")
	timeout := flag.Duration("timeout", 2*time.Minute, "deadline of the call")
	handler := flag.String("handler", "", "runtime handler for runp")
	flag.Parse()
	if *endpoint == "" || flag.NArg() < 1 {
		usage("usage: criclient -endpoint unix:///path VERB [ID]")
	}
	conn, err := grpc.NewClient(*endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		usage(err.Error())
	}
	defer conn.Close()
	rs := runtimeapi.NewRuntimeServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()

	id := func() string {
		if flag.NArg() != 2 {
			usage(flag.Arg(0) + " needs a sandbox ID")
		}
		return flag.Arg(1)
	}
	var resp proto.Message
	switch verb := flag.Arg(0); verb {
	case "version":
		resp, err = rs.Version(ctx, &runtimeapi.VersionRequest{})
	case "status":
		resp, err = rs.Status(ctx, &runtimeapi.StatusRequest{Verbose: true})
	case "runp":
		raw, rerr := io.ReadAll(os.Stdin)
		if rerr != nil {
			usage(rerr.Error())
		}
		cfg := &runtimeapi.PodSandboxConfig{}
		if uerr := protojson.Unmarshal(raw, cfg); uerr != nil {
			usage("stdin is not a PodSandboxConfig: " + uerr.Error())
		}
		resp, err = rs.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg, RuntimeHandler: *handler})
	case "inspectp":
		resp, err = rs.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id(), Verbose: true})
	case "stopp":
		resp, err = rs.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id()})
	case "rmp":
		resp, err = rs.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id()})
	case "pods":
		resp, err = rs.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	default:
		usage("unknown verb " + verb)
	}
	if err != nil {
		st, _ := status.FromError(err)
		out, _ := json.Marshal(map[string]string{"code": st.Code().String(), "message": st.Message()})
		fmt.Println(string(out))
		os.Exit(2)
	}
	out, err := protojson.MarshalOptions{EmitDefaultValues: true}.Marshal(resp)
	if err != nil {
		usage(err.Error())
	}
	fmt.Println(string(out))
}
