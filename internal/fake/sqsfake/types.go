package sqsfake

// Request and response bodies of the AWS JSON 1.0 protocol, with the member
// names of the SQS Smithy model (aws-sdk-go-v2/service/sqs/schemas). Integers
// are pointers because the SDK omits zero values.

type createQueueIn struct {
	QueueName  *string
	Attributes map[string]string
	Tags       map[string]string `json:"tags"`
}

type queueURLOut struct {
	QueueUrl string
}

type getQueueURLIn struct {
	QueueName              *string
	QueueOwnerAWSAccountId *string
}

type queueURLIn struct {
	QueueUrl *string
}

type getQueueAttributesIn struct {
	QueueUrl       *string
	AttributeNames []string
}

type attributesOut struct {
	Attributes map[string]string `json:",omitempty"`
}

type setQueueAttributesIn struct {
	QueueUrl   *string
	Attributes map[string]string
}

type listQueuesIn struct {
	QueueNamePrefix *string
	NextToken       *string
	MaxResults      *int64
}

type listQueuesOut struct {
	QueueUrls []string `json:",omitempty"`
	NextToken string   `json:",omitempty"`
}

type attrIn struct {
	DataType         *string
	StringValue      *string
	BinaryValue      []byte
	StringListValues []string
	BinaryListValues [][]byte
}

type sendMessageIn struct {
	QueueUrl                *string
	MessageBody             *string
	DelaySeconds            *int64
	MessageAttributes       map[string]attrIn
	MessageSystemAttributes map[string]attrIn
	MessageDeduplicationId  *string
	MessageGroupId          *string
}

type sendMessageOut struct {
	MD5OfMessageBody             string
	MD5OfMessageAttributes       string `json:",omitempty"`
	MD5OfMessageSystemAttributes string `json:",omitempty"`
	MessageId                    string
}

type sendMessageBatchEntry struct {
	Id                      *string
	MessageBody             *string
	DelaySeconds            *int64
	MessageAttributes       map[string]attrIn
	MessageSystemAttributes map[string]attrIn
	MessageDeduplicationId  *string
	MessageGroupId          *string
}

type sendMessageBatchIn struct {
	QueueUrl *string
	Entries  []sendMessageBatchEntry
}

type sendMessageBatchResultEntry struct {
	Id                           string
	MessageId                    string
	MD5OfMessageBody             string
	MD5OfMessageAttributes       string `json:",omitempty"`
	MD5OfMessageSystemAttributes string `json:",omitempty"`
}

type batchResultErrorEntry struct {
	Id          string
	Code        string
	Message     string `json:",omitempty"`
	SenderFault bool
}

type sendMessageBatchOut struct {
	Successful []sendMessageBatchResultEntry
	Failed     []batchResultErrorEntry
}

type receiveMessageIn struct {
	QueueUrl                    *string
	AttributeNames              []string
	MessageSystemAttributeNames []string
	MessageAttributeNames       []string
	MaxNumberOfMessages         *int64
	VisibilityTimeout           *int64
	WaitTimeSeconds             *int64
	ReceiveRequestAttemptId     *string
}

type messageOut struct {
	MessageId              string
	ReceiptHandle          string
	MD5OfBody              string
	Body                   string
	Attributes             map[string]string           `json:",omitempty"`
	MD5OfMessageAttributes string                      `json:",omitempty"`
	MessageAttributes      map[string]MessageAttribute `json:",omitempty"`
}

type receiveMessageOut struct {
	Messages []messageOut `json:",omitempty"`
}

type changeVisibilityIn struct {
	QueueUrl          *string
	ReceiptHandle     *string
	VisibilityTimeout *int64
}

type changeVisibilityBatchEntry struct {
	Id                *string
	ReceiptHandle     *string
	VisibilityTimeout *int64
}

type changeVisibilityBatchIn struct {
	QueueUrl *string
	Entries  []changeVisibilityBatchEntry
}

type idEntry struct {
	Id string
}

type batchOut struct {
	Successful []idEntry
	Failed     []batchResultErrorEntry
}

type deleteMessageIn struct {
	QueueUrl      *string
	ReceiptHandle *string
}

type deleteMessageBatchEntry struct {
	Id            *string
	ReceiptHandle *string
}

type deleteMessageBatchIn struct {
	QueueUrl *string
	Entries  []deleteMessageBatchEntry
}
