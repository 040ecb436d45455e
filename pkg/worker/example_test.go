package worker_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/cloudwego/eino/adk"
	"github.com/cloudwego/eino/components/model"
	"github.com/cloudwego/eino/components/tool"
	"github.com/cloudwego/eino/components/tool/utils"
	"github.com/cloudwego/eino/compose"
	"github.com/cloudwego/eino/schema"

	"github.com/turnpike-dev/turnpike/pkg/bridge"
	"github.com/turnpike-dev/turnpike/pkg/echo"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
	"github.com/turnpike-dev/turnpike/pkg/worker"
)

type weatherArgs struct {
	City string `json:"city"`
}

// A worker binary running a tool-calling agent built for each request:
// the tenant picks the instruction, the tool keys its work on the request
// id. Run it with cmd/worker's flags or environment
// (TURNPIKE_KAFKA_BROKERS, TURNPIKE_MONGO_URI, …).
func ExampleMain() {
	model, _ := echo.New(echo.Config{}) // any eino ToolCallingChatModel
	newAgent := func(ctx context.Context, r worker.Request) (adk.Agent, error) {
		weather, err := utils.InferTool("weather", "Tells the weather of a city.", func(ctx context.Context, a weatherArgs) (string, error) {
			req, _ := worker.RequestFromContext(ctx) // req.RequestID keys side effects
			return fmt.Sprintf("sunny in %s (%s)", a.City, req.RequestID), nil
		})
		if err != nil {
			return nil, err
		}
		return adk.NewChatModelAgent(ctx, &adk.ChatModelAgentConfig{
			Name: "assistant", Description: "Tells the weather.", Instruction: "You help " + r.Tenant + "'s users.",
			Model:       model,
			ToolsConfig: adk.ToolsConfig{ToolsNodeConfig: compose.ToolsNodeConfig{Tools: []tool.BaseTool{weather}}},
		})
	}
	worker.Main(worker.WithAgentFactory(newAgent))
}

// The defaults of the configuration (cmd/worker's).
func ExampleDefaultConfig() {
	c := worker.DefaultConfig()
	fmt.Println(c.GroupID, c.TopicPrefix, c.WindowMessages, c.MaxAttempts, c.Ordering, c.RunTimeout)
	// Output: turnpike-worker turnpike. 20 5 key 10m0s
}

// Settings from flags and the environment, as cmd/worker reads them.
func ExampleLoadConfig() {
	env := map[string]string{"TURNPIKE_KAFKA_BROKERS": "kafka-0:9092,kafka-1:9092", "TURNPIKE_MONGO_URI": "mongodb://mongo:27017"}
	c, err := worker.LoadConfig([]string{"-window", "40"}, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(c.Brokers, c.WindowMessages, c.Validate())
	// Output: [kafka-0:9092 kafka-1:9092] 40 <nil>
}

// The artifact sweep's schedule and age: their defaults, a replica that
// leaves the sweep to another (a negative interval), and an age that does
// not pass the longest run, refused.
func ExampleConfig_artifactSweep() {
	env := map[string]string{"TURNPIKE_KAFKA_BROKERS": "kafka-0:9092", "TURNPIKE_MONGO_URI": "mongodb://mongo:27017"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	c, _ := worker.LoadConfig(nil, lookup)
	fmt.Println(c.ArtifactSweepInterval, c.ArtifactSweepAge)
	c, _ = worker.LoadConfig([]string{"-artifact-sweep-interval", "-1s"}, lookup)
	fmt.Println(c.ArtifactSweepInterval, c.Validate())
	c, _ = worker.LoadConfig([]string{"-run-timeout", "2h", "-artifact-sweep-age", "90m"}, lookup)
	fmt.Println(c.Validate() != nil)
	// Output:
	// 1h0m0s 24h0m0s
	// -1s <nil>
	// true
}

// Only the sub-agent "billing" is streamed and persisted; a supervisor's
// own remarks are neither.
func ExampleWithStream() {
	billing := bridge.AgentRole("billing", schema.Assistant)
	_ = []worker.Option{worker.WithStream(billing), worker.WithPersist(billing)}
}

// Approval is what an approval tool expects when it is resumed.
type Approval struct{ Approved bool }

// A tool that interrupts to ask for approval is resumed with an Approval,
// not the answer's string: tool.GetResumeContext[Approval] would not see a
// string. "yes" or "no" are accepted; anything else rejects the resume,
// with the parse error as the notice, and the question stays pending.
func ExampleWithResumeAs() {
	opt := worker.WithResumeAs("approve_refund", func(answer string) (Approval, error) {
		switch strings.ToLower(answer) {
		case "yes":
			return Approval{Approved: true}, nil
		case "no":
			return Approval{}, nil
		}
		return Approval{}, errors.New("answer yes or no")
	})
	_ = opt
}

// A model whose errors carry a retry hint: worth running the request again.
func ExampleWithTransientErrors() {
	type overloaded interface{ Overloaded() bool }
	opt := worker.WithTransientErrors(func(err error) bool {
		var o overloaded
		return errors.As(err, &o) && o.Overloaded()
	})
	_ = opt
}

// An agent factory error that retrying cannot help dead-letters the
// request at once.
func ExamplePermanent() {
	err := worker.Permanent(errors.New("no agent for tenant acme"))
	fmt.Println(err)
	fmt.Println(errors.Is(err, events.ErrInvalid))
	// Output:
	// no agent for tenant acme
	// true
}

// A worker run from Go, stopped by its context.
func ExampleNew() {
	cfg := worker.DefaultConfig()
	cfg.Brokers, cfg.MongoURI = []string{"localhost:9092"}, "mongodb://localhost:27017"
	model, _ := echo.New(echo.Config{})
	agent, _ := adk.NewChatModelAgent(context.Background(), &adk.ChatModelAgentConfig{
		Name: "assistant", Description: "Answers.", Model: model,
	})
	w, err := worker.New(cfg, worker.WithAgent(agent)) // no tools: safe to share between runs
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	_ = w.Run(ctx)
}

// myModel is a custom tool-calling model. It reads its tools the way eino
// v0.9's ChatModelAgent gives them, as the model.WithTools call option,
// and falls back on the tools bound by WithTools (eino v0.7, and callers
// that bind them).
type myModel struct{ bound []*schema.ToolInfo }

func (m myModel) WithTools(tools []*schema.ToolInfo) (model.ToolCallingChatModel, error) {
	m.bound = tools
	return m, nil
}

// tools are the tools of one call: the option's, else the bound ones.
func (m myModel) tools(opts []model.Option) []*schema.ToolInfo {
	return model.GetCommonOptions(&model.Options{Tools: m.bound}, opts...).Tools
}

func (m myModel) Generate(_ context.Context, in []*schema.Message, opts ...model.Option) (*schema.Message, error) {
	if last := in[len(in)-1]; last.Role == schema.Tool {
		return schema.AssistantMessage("It is "+last.Content+".", nil), nil
	}
	var names []string
	for _, t := range m.tools(opts) {
		names = append(names, t.Name)
	}
	fmt.Println("the model sees:", names)
	if len(names) == 0 {
		return schema.AssistantMessage("I have no tools.", nil), nil
	}
	return schema.AssistantMessage("", []schema.ToolCall{{ID: "1", Type: "function",
		Function: schema.FunctionCall{Name: names[0], Arguments: `{"city":"Paris"}`}}}), nil
}

func (m myModel) Stream(ctx context.Context, in []*schema.Message, opts ...model.Option) (*schema.StreamReader[*schema.Message], error) {
	msg, err := m.Generate(ctx, in, opts...)
	if err != nil {
		return nil, err
	}
	return schema.StreamReaderFromArray([]*schema.Message{msg}), nil
}

// A custom model on eino v0.9 must read the model.WithTools call option:
// ChatModelAgent passes its tools that way and never calls WithTools.
func Example_customModelTools() {
	ctx := context.Background()
	weather, _ := utils.InferTool("weather", "the weather in a city", func(_ context.Context, a weatherArgs) (string, error) {
		return "sunny in " + a.City, nil
	})
	agent, err := adk.NewChatModelAgent(ctx, &adk.ChatModelAgentConfig{
		Name: "forecaster", Description: "tells the weather", Model: myModel{},
		ToolsConfig: adk.ToolsConfig{ToolsNodeConfig: compose.ToolsNodeConfig{Tools: []tool.BaseTool{weather}}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	events := adk.NewRunner(ctx, adk.RunnerConfig{Agent: agent}).Run(ctx, []adk.Message{schema.UserMessage("Weather in Paris?")})
	for {
		event, ok := events.Next()
		if !ok {
			break
		}
		if out := event.Output; out != nil && out.MessageOutput != nil && out.MessageOutput.Role == schema.Assistant {
			if msg, _ := out.MessageOutput.GetMessage(); msg.Content != "" {
				fmt.Println(msg.Content)
			}
		}
	}
	// Output:
	// the model sees: [weather]
	// It is sunny in Paris.
}

type chargeArgs struct {
	Order string `json:"order"`
	Cents int    `json:"cents"`
}

// A Go agent made durable with one line: Durable on its
// ChatModelAgentConfig (on the supervisor's and each sub-agent's, in a
// tree). A re-run of a request then replays the model outputs and tool
// results its earlier run recorded.
func ExampleDurable() {
	model, _ := echo.New(echo.Config{}) // any eino ToolCallingChatModel
	newAgent := func(ctx context.Context, r worker.Request) (adk.Agent, error) {
		charge, err := utils.InferTool("charge", "Charges an order.", func(ctx context.Context, a chargeArgs) (string, error) {
			return "charged " + a.Order, nil
		})
		if err != nil {
			return nil, err
		}
		return adk.NewChatModelAgent(ctx, worker.Durable(&adk.ChatModelAgentConfig{
			Name: "assistant", Description: "Takes orders.", Model: model,
			ToolsConfig: adk.ToolsConfig{ToolsNodeConfig: compose.ToolsNodeConfig{Tools: []tool.BaseTool{charge}}},
		}))
	}
	worker.Main(worker.WithAgentFactory(newAgent))
}

// paymentService stands for a payment API that deduplicates by an
// idempotency key.
type paymentService interface {
	Charge(ctx context.Context, idempotencyKey, order string, cents int) (string, error)
}

// A tool of a durable agent keys its side effect on its step: the journal
// runs it once per request, except when a run stops between the side
// effect and the record of its result; the next run calls it again with
// the same Key (and a higher Attempt), and the service answers the first
// charge's result instead of charging twice.
func ExampleToolStepFromContext() {
	var payments paymentService // your client
	charge, _ := utils.InferTool("charge", "Charges an order.", func(ctx context.Context, a chargeArgs) (string, error) {
		key := "" // not a durable run: no step (key on the request id instead)
		if step, ok := worker.ToolStepFromContext(ctx); ok {
			key = step.Key // "<request id>/t/<agent>/<model call>/<tool call id>"
		} else if r, ok := worker.RequestFromContext(ctx); ok {
			key = r.RequestID + "/charge/" + a.Order
		}
		return payments.Charge(ctx, key, a.Order, a.Cents)
	})
	_ = charge
}

type languageArgs struct {
	Set string `json:"set,omitempty"`
}

// A tool that remembers the user's preferred language across their
// conversations: a user: key of the run's session state. The change is
// committed with the turn; the user's next conversation reads it.
func ExampleStateFromContext() {
	language, _ := utils.InferTool("language", "Sets or tells the user's preferred language.", func(ctx context.Context, a languageArgs) (string, error) {
		st := worker.StateFromContext(ctx)
		if a.Set != "" {
			return "set to " + a.Set, st.Set("user:lang", a.Set)
		}
		var lang string
		if found, err := st.Get(ctx, "user:lang", &lang); err != nil || !found {
			return "no preference", err
		}
		return lang, nil
	})
	model, _ := echo.New(echo.Config{}) // any eino ToolCallingChatModel
	step, _ := worker.NewStep(worker.DefaultConfig(), worker.WithAgentFactory(func(ctx context.Context, _ worker.Request) (adk.Agent, error) {
		return adk.NewChatModelAgent(ctx, &adk.ChatModelAgentConfig{Name: "assistant", Description: "Remembers languages.", Model: model,
			ToolsConfig: adk.ToolsConfig{ToolsNodeConfig: compose.ToolsNodeConfig{Tools: []tool.BaseTool{language}}}})
	}))
	store := history.NewMemoryStore() // the worker's MongoStore in production
	for _, r := range []struct{ conversation, content string }{
		{"first", `[[call:language]] {"set":"fr"}`},
		{"second", `[[call:language]]`},
	} {
		res, err := step.Run(context.Background(), events.Request{V: events.Version, Tenant: "acme", User: "ann",
			Conversation: r.conversation, RequestID: "r1", Content: r.content}, store, discard{})
		fmt.Println(res.Answer, err)
	}
	// Output:
	// echo #1: set to fr <nil>
	// echo #1: fr <nil>
}

// discard is a sink that keeps no event.
type discard struct{}

func (discard) Emit(context.Context, events.Identity, events.Event) error { return nil }
