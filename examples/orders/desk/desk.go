// Package desk is the agent of the orders example, an eino agent run on
// Turnpike: an order desk (an eino supervisor) with one sub-agent that
// looks orders up in an in-memory table with a Go tool and cancels them
// after asking the user (an interrupt resumed with a typed value).
// Scripted models make it run offline and deterministically; swap in any
// eino chat model.
//
// It imports only Turnpike's public packages: the example's main.go runs
// it on the devstack or on real Kafka and MongoDB, and its tests run it on
// the real pipeline through pkg/turnpiketest.
package desk

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/cloudwego/eino/adk"
	"github.com/cloudwego/eino/adk/prebuilt/supervisor"
	"github.com/cloudwego/eino/components/model"
	"github.com/cloudwego/eino/components/tool"
	"github.com/cloudwego/eino/components/tool/utils"
	"github.com/cloudwego/eino/compose"
	"github.com/cloudwego/eino/schema"

	"github.com/turnpike-dev/turnpike/pkg/bridge"
	"github.com/turnpike-dev/turnpike/pkg/worker"
)

// Agent names.
const (
	DeskAgent   = "desk"
	OrdersAgent = "orders"
)

// Tool names.
const (
	LookupTool = "lookup_order"
	CancelTool = "cancel_order"
)

// Order is one row of the table.
type Order struct {
	ID, Item, Status string
}

// Table is an in-memory order table, safe for concurrent use.
type Table struct {
	mu     sync.Mutex
	orders map[string]*Order
	// cancelledBy is the request that cancelled each order: a cancel is
	// keyed on its request id, so a re-run of that request (Turnpike runs
	// agent code at least once) changes nothing.
	cancelledBy map[string]string
}

// NewTable returns a table holding orders.
func NewTable(orders ...Order) *Table {
	t := &Table{orders: map[string]*Order{}, cancelledBy: map[string]string{}}
	for _, o := range orders {
		t.orders[o.ID] = &o
	}
	return t
}

// SampleTable is the table the example's main.go serves.
func SampleTable() *Table {
	return NewTable(Order{ID: "42", Item: "kettle", Status: "shipped"}, Order{ID: "7", Item: "teapot", Status: "processing"})
}

// Get returns order id.
func (t *Table) Get(id string) (Order, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	o, ok := t.orders[id]
	if !ok {
		return Order{}, false
	}
	return *o, true
}

// Cancel cancels order id on behalf of request requestID: once, however
// often that request runs. It reports whether the order is cancelled.
func (t *Table) Cancel(id, requestID string) (bool, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	o, ok := t.orders[id]
	if !ok {
		return false, fmt.Errorf("no order %s", id)
	}
	if by, done := t.cancelledBy[id]; done {
		return by == requestID || o.Status == "cancelled", nil
	}
	if o.Status == "shipped" {
		return false, nil
	}
	o.Status = "cancelled"
	t.cancelledBy[id] = requestID
	return true, nil
}

// Cancels returns how many orders were cancelled.
func (t *Table) Cancels() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.cancelledBy)
}

type orderArgs struct {
	ID string `json:"id" jsonschema:"description=the order number"`
}

// NewLookupTool looks orders up in t.
func NewLookupTool(t *Table) (tool.InvokableTool, error) {
	return utils.InferTool(LookupTool, "Looks an order up by its number.", func(_ context.Context, a orderArgs) (string, error) {
		o, ok := t.Get(a.ID)
		if !ok {
			return fmt.Sprintf("There is no order %s.", a.ID), nil
		}
		return fmt.Sprintf("Order %s (%s) is %s.", o.ID, o.Item, o.Status), nil
	})
}

// Confirmation is the typed answer to the cancel tool's question.
type Confirmation struct{ Yes bool }

// ParseConfirmation reads a user's answer: yes or no.
func ParseConfirmation(answer string) (Confirmation, error) {
	switch strings.ToLower(strings.TrimSpace(answer)) {
	case "yes", "y":
		return Confirmation{Yes: true}, nil
	case "no", "n":
		return Confirmation{}, nil
	}
	return Confirmation{}, fmt.Errorf("answer yes or no, not %q", answer)
}

// NewCancelTool cancels orders of t, after asking the user: it interrupts
// the run with its question, and the resumed run hands it the user's
// Confirmation (WithResumeAs in Options turns the answer into one).
func NewCancelTool(t *Table) (tool.InvokableTool, error) {
	return utils.InferTool(CancelTool, "Cancels an order, after asking the user to confirm.", func(ctx context.Context, a orderArgs) (string, error) {
		o, ok := t.Get(a.ID)
		if !ok {
			return fmt.Sprintf("There is no order %s.", a.ID), nil
		}
		if interrupted, _, _ := tool.GetInterruptState[any](ctx); interrupted {
			if resumed, hasAnswer, c := tool.GetResumeContext[Confirmation](ctx); resumed && hasAnswer {
				if !c.Yes {
					return fmt.Sprintf("Order %s is kept.", o.ID), nil
				}
				r, ok := worker.RequestFromContext(ctx)
				if !ok {
					return "", errors.New("cancel_order: no request in the context")
				}
				done, err := t.Cancel(o.ID, r.RequestID)
				if err != nil {
					return "", err
				}
				if !done {
					return fmt.Sprintf("Order %s is already %s and cannot be cancelled.", o.ID, o.Status), nil
				}
				return fmt.Sprintf("Order %s is cancelled.", o.ID), nil
			}
		}
		return "", tool.Interrupt(ctx, fmt.Sprintf("Cancel order %s (%s)? Answer yes or no.", o.ID, o.Item))
	})
}

// NewAgent builds the order desk on models deskModel and ordersModel: a
// supervisor (the desk) that hands every question to its one sub-agent
// (orders), which has the two tools. Build it for each run
// (worker.WithAgentFactory): a tool-calling agent must not be shared
// between concurrent runs on eino v0.9.21, and supervisor.New binds its
// sub-agent to one parent.
func NewAgent(ctx context.Context, t *Table, deskModel, ordersModel model.ToolCallingChatModel) (adk.Agent, error) {
	lookup, err := NewLookupTool(t)
	if err != nil {
		return nil, err
	}
	cancel, err := NewCancelTool(t)
	if err != nil {
		return nil, err
	}
	orders, err := adk.NewChatModelAgent(ctx, &adk.ChatModelAgentConfig{
		Name: OrdersAgent, Description: "Answers questions about orders and cancels them.",
		Instruction: "Look orders up and cancel them when asked; confirm cancellations with the user.",
		Model:       ordersModel,
		ToolsConfig: adk.ToolsConfig{ToolsNodeConfig: compose.ToolsNodeConfig{Tools: []tool.BaseTool{lookup, cancel}}},
	})
	if err != nil {
		return nil, err
	}
	desk, err := adk.NewChatModelAgent(ctx, &adk.ChatModelAgentConfig{
		Name: DeskAgent, Description: "The order desk.",
		Instruction: "Hand questions about orders to the orders agent, then close politely.",
		Model:       deskModel,
	})
	if err != nil {
		return nil, err
	}
	return supervisor.New(ctx, &supervisor.Config{Supervisor: desk, SubAgents: []adk.Agent{orders}})
}

// Options are the worker options that run the order desk on t with the
// scripted models: a new agent per run, only the orders agent's answers
// persisted (the desk's closing line is streamed, not kept), and the
// cancel tool's interrupts resumed with a Confirmation.
func Options(t *Table) []worker.Option {
	return []worker.Option{
		worker.WithAgentFactory(func(ctx context.Context, _ worker.Request) (adk.Agent, error) {
			return NewAgent(ctx, t, DeskModel(), OrdersModel())
		}),
		worker.WithPersist(bridge.AgentRole(OrdersAgent, schema.Assistant)),
		worker.WithResumeAs(CancelTool, ParseConfirmation),
	}
}
