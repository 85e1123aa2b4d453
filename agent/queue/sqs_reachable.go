package queue

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// Reachable asks SQS for one attribute of the task queue
// (GetQueueAttributes): nil when the queue answers with the instance's
// credentials, the error otherwise. The agent's launch readiness check
// calls it, so an instance that cannot reach its queue is not put in
// service.
func (s *SQS) Reachable(ctx context.Context) error {
	_, err := s.c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl:       aws.String(s.o.QueueURL),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn},
	})
	if err != nil {
		return fmt.Errorf("queue: get attributes of %s: %w", s.o.QueueURL, err)
	}
	return nil
}
