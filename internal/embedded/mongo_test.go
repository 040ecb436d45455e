package embedded_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/turnpike-dev/turnpike/internal/testenv"
)

// These tests cover Turnpike's patch of FerretDB's SQLite backend that
// pushes _id ranges, $in, a sort on _id and a limit down to SQLite's _id
// index (third_party/ferretdb/TURNPIKE_PATCHES.md): the results are
// MongoDB's, and FerretDB's explain (its SQLite query plan and pushdown
// flags) shows the index doing the work.

// idCollection returns a collection holding the string _ids "a#001" …
// "a#030", "b#001" … "b#030" and "c#001" … "c#030", ObjectIDs whose hex
// text lies between them, and an integer _id.
func idCollection(t *testing.T, ctx context.Context) (*mongo.Database, *mongo.Collection, []string) {
	t.Helper()
	db := testenv.MongoClient(t, testenv.EmbeddedMongo(t, t.TempDir()).URI()).Database("pushdown")
	coll := db.Collection("docs")
	var ids []string
	var docs []any
	for _, p := range []string{"a", "b", "c"} {
		for i := 1; i <= 30; i++ {
			id := fmt.Sprintf("%s#%03d", p, i)
			ids = append(ids, id)
			docs = append(docs, bson.D{{Key: "_id", Value: id}, {Key: "n", Value: i}})
		}
	}
	for _, hex := range []string{"b0000000000000000000000a", "b1234567890abcdef1234567"} {
		oid, err := bson.ObjectIDFromHex(hex)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, bson.D{{Key: "_id", Value: oid}, {Key: "n", Value: 0}})
	}
	docs = append(docs, bson.D{{Key: "_id", Value: 42}, {Key: "n", Value: 0}})
	if _, err := coll.InsertMany(ctx, docs); err != nil {
		t.Fatal(err)
	}
	return db, coll, ids
}

func findIDs(t *testing.T, ctx context.Context, coll *mongo.Collection, filter, sort bson.D, limit int64) []string {
	t.Helper()
	opts := options.Find()
	if sort != nil {
		opts.SetSort(sort)
	}
	if limit != 0 {
		opts.SetLimit(limit)
	}
	cur, err := coll.Find(ctx, filter, opts)
	if err != nil {
		t.Fatalf("find %v: %v", filter, err)
	}
	var docs []struct {
		ID any `bson:"_id"`
	}
	if err := cur.All(ctx, &docs); err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(docs))
	for i, d := range docs {
		out[i] = fmt.Sprint(d.ID)
	}
	return out
}

type explained struct {
	Plan                          []string
	Filter, Sort, Limit, Scanning bool
}

// explain runs FerretDB's explain of a find.
func explain(t *testing.T, ctx context.Context, db *mongo.Database, filter, sort bson.D, limit int64) explained {
	t.Helper()
	find := bson.D{{Key: "find", Value: "docs"}, {Key: "filter", Value: filter}}
	if sort != nil {
		find = append(find, bson.E{Key: "sort", Value: sort})
	}
	if limit != 0 {
		find = append(find, bson.E{Key: "limit", Value: limit})
	}
	var res struct {
		QueryPlanner struct {
			Plan []string `bson:"Plan"`
		} `bson:"queryPlanner"`
		FilterPushdown bool `bson:"filterPushdown"`
		SortPushdown   bool `bson:"sortPushdown"`
		LimitPushdown  bool `bson:"limitPushdown"`
	}
	if err := db.RunCommand(ctx, bson.D{{Key: "explain", Value: find}}).Decode(&res); err != nil {
		t.Fatalf("explain: %v", err)
	}
	e := explained{Plan: res.QueryPlanner.Plan, Filter: res.FilterPushdown, Sort: res.SortPushdown, Limit: res.LimitPushdown}
	for _, step := range e.Plan {
		// "SCAN <table>" reads every row; "SEARCH … USING INDEX" does not.
		// A temporary B-tree is a sort SQLite does itself.
		if strings.Contains(step, "detail=SCAN") || strings.Contains(step, "TEMP B-TREE") {
			e.Scanning = true
		}
	}
	return e
}

func rng(op1, v1, op2, v2 string) bson.D {
	return bson.D{{Key: "_id", Value: bson.D{{Key: op1, Value: v1}, {Key: op2, Value: v2}}}}
}

// want is what MongoDB returns for a range over the string _ids: the
// strings s with lo <op1> s and s <op2> hi, in order, up to limit.
func want(ids []string, lo, hi string, loIncl, hiIncl, desc bool, limit int) []string {
	var out []string
	for _, id := range ids {
		if (id > lo || loIncl && id == lo) && (id < hi || hiIncl && id == hi) {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	if desc {
		slices.Reverse(out)
	}
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	if out == nil {
		out = []string{}
	}
	return out
}

func TestIDRangeWithSortAndLimitIsOneIndexSearch(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	db, coll, ids := idCollection(t, ctx)
	tests := []struct {
		name           string
		op1, lo        string
		op2, hi        string
		desc           bool
		limit          int
		loIncl, hiIncl bool
	}{
		{"The newest five of a prefix, newest first.", "$gte", "b#000", "$lte", "b#999", true, 5, true, true},
		{"The oldest three of a prefix, oldest first.", "$gte", "b#000", "$lte", "b#999", false, 3, true, true},
		{"Exclusive bounds exclude the documents at them.", "$gt", "b#010", "$lt", "b#020", true, 100, false, false},
		{"A range across prefixes skips the ObjectIDs whose hex lies in it.", "$gt", "a#025", "$lte", "c#002", false, 36, false, true},
		{"A limit past the range returns the range.", "$gte", "c#028", "$lte", "c#999", true, 10, true, true},
		{"An empty range returns nothing.", "$gt", "b#999", "$lt", "c#", true, 10, false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := 1
			if tc.desc {
				dir = -1
			}
			filter, sort := rng(tc.op1, tc.lo, tc.op2, tc.hi), bson.D{{Key: "_id", Value: dir}}
			got := findIDs(t, ctx, coll, filter, sort, int64(tc.limit))
			if w := want(ids, tc.lo, tc.hi, tc.loIncl, tc.hiIncl, tc.desc, tc.limit); !slices.Equal(got, w) {
				t.Fatalf("find = %v, want %v", got, w)
			}
			e := explain(t, ctx, db, filter, sort, int64(tc.limit))
			t.Logf("plan: %q", e.Plan)
			if !e.Filter || !e.Sort || !e.Limit || e.Scanning {
				t.Fatalf("explain = %+v: want filter, sort and limit pushed down to an index search", e)
			}
		})
	}
}

func TestIDPushdownKeepsMongoDBResults(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	db, coll, _ := idCollection(t, ctx)
	desc := bson.D{{Key: "_id", Value: -1}}
	tests := []struct {
		name                  string
		filter, sort          bson.D
		limit                 int64
		want                  []string
		filterDown, limitDown bool
		indexOnly             bool
	}{
		{
			name:   "A range open above returns strings only, with the limit pushed down.",
			filter: bson.D{{Key: "_id", Value: bson.D{{Key: "$gt", Value: "c#027"}}}}, sort: desc, limit: 2,
			want: []string{"c#030", "c#029"}, filterDown: true, limitDown: true, indexOnly: true,
		},
		{
			name:   "A range with another field is pushed down without the limit; the handler applies it.",
			filter: append(rng("$gte", "a#000", "$lte", "a#999"), bson.E{Key: "n", Value: bson.D{{Key: "$gt", Value: 27}}}), sort: desc, limit: 2,
			want: []string{"a#030", "a#029"}, filterDown: true, limitDown: false, indexOnly: true,
		},
		{
			name:   "A bound JSON would escape is not pushed down, and the results are still right.",
			filter: rng("$gte", "b#0 ", "$lte", "b#002"), sort: desc, limit: 5,
			want: []string{"b#002", "b#001"}, filterDown: false, limitDown: false,
		},
		{
			name:   "A bound of another type is not pushed down.",
			filter: bson.D{{Key: "_id", Value: bson.D{{Key: "$gte", Value: 40}}}}, sort: desc, limit: 5,
			want: []string{"42"}, filterDown: false, limitDown: false,
		},
		{
			name:   "Two lower bounds are not pushed down.",
			filter: bson.D{{Key: "_id", Value: bson.D{{Key: "$gt", Value: "c#020"}, {Key: "$gte", Value: "c#028"}}}}, sort: desc, limit: 5,
			want: []string{"c#030", "c#029", "c#028"}, filterDown: false, limitDown: false,
		},
		{
			name:   "$in of strings is an index search.",
			filter: bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: bson.A{"a#003", "c#030", "z#001"}}}}}, sort: nil,
			want: []string{"a#003", "c#030"}, filterDown: true, limitDown: false, indexOnly: true,
		},
		{
			name:   "A sort on another field is not pushed down.",
			filter: rng("$gte", "a#000", "$lte", "a#999"), sort: bson.D{{Key: "n", Value: -1}}, limit: 1,
			want: []string{"a#030"}, filterDown: true, limitDown: false,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := findIDs(t, ctx, coll, tc.filter, tc.sort, tc.limit)
			if tc.sort == nil {
				slices.Sort(got)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("find = %v, want %v", got, tc.want)
			}
			e := explain(t, ctx, db, tc.filter, tc.sort, tc.limit)
			if e.Filter != tc.filterDown || e.Limit != tc.limitDown || tc.indexOnly && slices.ContainsFunc(e.Plan, func(s string) bool { return strings.Contains(s, "detail=SCAN") }) {
				t.Fatalf("explain = %+v: want filter pushed down %v, limit %v, index only %v", e, tc.filterDown, tc.limitDown, tc.indexOnly)
			}
		})
	}
}

// TestUpdateOfManyStatementsCompletes guards Turnpike's patch of FerretDB's
// update command: each statement's query is closed when the statement is
// done. Upstream kept every statement's query, and its SQLite connection,
// open to the end of the command, so one command of more statements than
// the pool has connections (100) waited forever for one more.
func TestUpdateOfManyStatementsCompletes(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	coll := testenv.MongoClient(t, testenv.EmbeddedMongo(t, t.TempDir()).URI()).Database("updates").Collection("docs")
	const n = 150
	var models []mongo.WriteModel
	for i := range n {
		models = append(models, mongo.NewUpdateOneModel().SetFilter(bson.D{{Key: "_id", Value: fmt.Sprintf("d%03d", i%50)}}).
			SetUpdate(bson.D{{Key: "$max", Value: bson.D{{Key: "n", Value: i}}}}).SetUpsert(true))
	}
	res, err := coll.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(false))
	if err != nil {
		t.Fatalf("bulk write of %d updates: %v", n, err)
	}
	if res.UpsertedCount+res.MatchedCount != n {
		t.Fatalf("bulk write = %+v, want %d statements applied", res, n)
	}
	var d struct {
		N int `bson:"n"`
	}
	if err := coll.FindOne(ctx, bson.D{{Key: "_id", Value: "d007"}}).Decode(&d); err != nil || d.N != 107 {
		t.Fatalf("d007 = %+v, %v; want n 107", d, err)
	}
}

// TestUnorderedInsertReportsEachDuplicate checks what the history store's
// group commit relies on: an unordered insert of many documents inserts
// every one it can and reports each duplicate key at its own index.
func TestUnorderedInsertReportsEachDuplicate(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	coll := testenv.MongoClient(t, testenv.EmbeddedMongo(t, t.TempDir()).URI()).Database("inserts").Collection("docs")
	if _, err := coll.InsertMany(ctx, []any{bson.D{{Key: "_id", Value: "b"}}, bson.D{{Key: "_id", Value: "d"}}}); err != nil {
		t.Fatal(err)
	}
	_, err := coll.InsertMany(ctx, []any{
		bson.D{{Key: "_id", Value: "a"}}, bson.D{{Key: "_id", Value: "b"}}, bson.D{{Key: "_id", Value: "c"}},
		bson.D{{Key: "_id", Value: "d"}}, bson.D{{Key: "_id", Value: "e"}},
	}, options.InsertMany().SetOrdered(false))
	var bwe mongo.BulkWriteException
	if !errors.As(err, &bwe) || bwe.WriteConcernError != nil {
		t.Fatalf("InsertMany = %v, want a bulk write exception", err)
	}
	var dups []int
	for _, we := range bwe.WriteErrors {
		if we.Code == 11000 {
			dups = append(dups, we.Index)
		}
	}
	if !slices.Equal(dups, []int{1, 3}) || len(bwe.WriteErrors) != 2 {
		t.Fatalf("write errors %+v, want duplicates at 1 and 3", bwe.WriteErrors)
	}
	if got := findIDs(t, ctx, coll, bson.D{}, bson.D{{Key: "_id", Value: 1}}, 0); !slices.Equal(got, []string{"a", "b", "c", "d", "e"}) {
		t.Fatalf("documents %v, want a … e", got)
	}
}

// TestConcurrentUpdatesOfOneDocumentAllLand covers patch 8 (an update
// statement and a findAndModify hold their collection's update lock from
// their read to their write): concurrent updates of one document, plain,
// conditional and findAndModify, each land, as on MongoDB, where an update
// of one document is atomic. Upstream each read the document, modified it
// in Go and wrote it back, so two of them could both read the same version
// and the later write drop the earlier one (4 to 7 of 12 concurrent
// conditional appends landed).
func TestConcurrentUpdatesOfOneDocumentAllLand(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	coll := testenv.MongoClient(t, testenv.EmbeddedMongo(t, t.TempDir()).URI()).Database("atomic").Collection("docs")
	const rounds, writers = 4, 12
	for round := range rounds {
		id := fmt.Sprintf("doc-%d", round)
		if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: id}, {Key: "n", Value: 0}, {Key: "m", Value: 0}, {Key: "seen", Value: bson.A{}}}); err != nil {
			t.Fatal(err)
		}
		errs := make(chan error, 2*writers)
		for w := range writers {
			go func() {
				// Conditional: appends w unless it is there already (the
				// shape of a fenced, once-only append).
				res, err := coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: id}, {Key: "seen", Value: bson.D{{Key: "$ne", Value: w}}}},
					bson.D{{Key: "$push", Value: bson.D{{Key: "seen", Value: w}}}, {Key: "$inc", Value: bson.D{{Key: "n", Value: 1}}}})
				if err == nil && res.ModifiedCount != 1 {
					err = fmt.Errorf("writer %d: modified %d", w, res.ModifiedCount)
				}
				errs <- err
			}()
			go func() {
				errs <- coll.FindOneAndUpdate(ctx, bson.D{{Key: "_id", Value: id}}, bson.D{{Key: "$inc", Value: bson.D{{Key: "m", Value: 1}}}}).Err()
			}()
		}
		for range 2 * writers {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		var d struct {
			N    int   `bson:"n"`
			M    int   `bson:"m"`
			Seen []int `bson:"seen"`
		}
		if err := coll.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Decode(&d); err != nil {
			t.Fatal(err)
		}
		if d.N != writers || d.M != writers || len(d.Seen) != writers {
			t.Fatalf("round %d: n %d, m %d, %d appended; want %d each: concurrent updates were lost", round, d.N, d.M, len(d.Seen), writers)
		}
	}
}

// FerretDB patch 10: $push with $each and $slice bounds the array as
// MongoDB does (a negative $slice keeps the last elements, a positive one
// the first, 0 none; upstream ignored $slice and grew the array); a
// $slice that is not an integer and an unknown clause are BadValues, and
// the modifiers not implemented ($position, $sort) are refused, never
// ignored.
func TestPushSliceBoundsTheArray(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	coll := testenv.MongoClient(t, testenv.EmbeddedMongo(t, t.TempDir()).URI()).Database("slice").Collection("docs")
	push := func(id string, each bson.A, mods ...bson.E) error {
		m := append(bson.D{{Key: "$each", Value: each}}, mods...)
		_, err := coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: id}}, bson.D{{Key: "$push", Value: bson.D{{Key: "a", Value: m}}}}, options.UpdateOne().SetUpsert(true))
		return err
	}
	read := func(id string) []int {
		t.Helper()
		var d struct {
			A []int `bson:"a"`
		}
		if err := coll.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Decode(&d); err != nil {
			t.Fatal(err)
		}
		return d.A
	}
	for _, tc := range []struct {
		name  string
		slice any
		want  []int
	}{
		{"last", int32(-3), []int{5, 6, 7}},
		{"last of more than there are", int64(-10), []int{1, 2, 3, 4, 5, 6, 7}},
		{"first", 2.0, []int{1, 2}},
		{"none", int32(0), []int{}},
	} {
		id := strings.ReplaceAll(tc.name, " ", "-")
		if err := push(id, bson.A{1, 2, 3}); err != nil {
			t.Fatal(err)
		}
		if err := push(id, bson.A{4, 5, 6, 7}, bson.E{Key: "$slice", Value: tc.slice}); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := read(id); !slices.Equal(got, tc.want) {
			t.Errorf("%s: $slice %v kept %v, want %v", tc.name, tc.slice, got, tc.want)
		}
	}
	// Bounded over many pushes, as Turnpike's cancelled-request list is.
	for i := range 20 {
		if err := push("bounded", bson.A{i}, bson.E{Key: "$slice", Value: -5}); err != nil {
			t.Fatal(err)
		}
	}
	if got := read("bounded"); !slices.Equal(got, []int{15, 16, 17, 18, 19}) {
		t.Errorf("20 pushes with $slice -5 kept %v, want the last five", got)
	}
	code := func(err error) int {
		var we mongo.WriteException
		if errors.As(err, &we) && len(we.WriteErrors) == 1 {
			return we.WriteErrors[0].Code
		}
		return 0
	}
	if err := push("bad", bson.A{1}, bson.E{Key: "$slice", Value: "x"}); code(err) != 2 {
		t.Errorf("a $slice of a string: %v, want BadValue (2)", err)
	}
	for _, mod := range []bson.E{{Key: "$position", Value: 0}, {Key: "$sort", Value: 1}} {
		if err := push("bad", bson.A{1}, mod); code(err) != 238 {
			t.Errorf("$push with %s: %v, want NotImplemented (238), not ignored", mod.Key, err)
		}
	}
	if err := push("bad", bson.A{1}, bson.E{Key: "$slize", Value: -1}); code(err) != 2 {
		t.Errorf("$push with an unknown clause: %v, want BadValue (2), as MongoDB", err)
	}
}
