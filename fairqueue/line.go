package fairqueue

import (
	"fmt"

	"github.com/zkrecipes/zkrecipes/internal/line"
)

// The consumers' line: each waiting consumer has an EPHEMERAL|SEQUENCE node
// "_zkr_<guid>-take-<seq>" in line/ (the shared engine, internal/line,
// makes it, finds it again after a create whose reply was lost, and cleans
// up after a create abandoned mid-flight). What a node's data says, and who
// writes it, is in offer.go; who watches whom, in take.go.

// lineSpec is the consumers' line of q, for a node that wants want items.
func (q *Queue) lineSpec(want int) *line.Spec {
	marker := "-take-"
	if want > 1 {
		marker = fmt.Sprintf(".%d-take-", want)
	}
	return &line.Spec{
		Dir: q.line, Kind: line.Consumer, Marker: marker, Data: []byte{}, ACL: q.acl,
		ListWithCreate: true,
		Busy:           ErrEmpty, Lost: errLineLost, Mixed: errMixed,
	}
}
