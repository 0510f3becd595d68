# HTTPS load balancer in front of the broker tasks; TLS ends here.
resource "aws_lb" "broker" {
  #checkov:skip=CKV_AWS_91:Access logs need a separate SSE-S3 log bucket; the broker logs every request to CloudWatch already.
  #checkov:skip=CKV2_AWS_28:A WAF is an account-level choice (and cost); the broker authenticates every route with bearer tokens or Slack signatures.
  name                       = "${var.name}-lb"
  load_balancer_type         = "application"
  internal                   = false
  subnets                    = var.public_subnet_ids
  security_groups            = [aws_security_group.lb.id]
  drop_invalid_header_fields = true
  enable_deletion_protection = var.deletion_protection
}

resource "aws_lb_target_group" "broker" {
  name                 = "${var.name}-tasks"
  port                 = local.broker_port
  protocol             = "HTTP"
  target_type          = "ip"
  vpc_id               = var.vpc_id
  deregistration_delay = 30

  health_check {
    path                = "/v1/healthz"
    matcher             = "200"
    interval            = 15
    healthy_threshold   = 2
    unhealthy_threshold = 3
  }
}

resource "aws_lb_listener" "https" {
  load_balancer_arn = aws_lb.broker.arn
  port              = 443
  protocol          = "HTTPS"
  ssl_policy        = "ELBSecurityPolicy-TLS13-1-2-2021-06"
  certificate_arn   = var.certificate_arn

  default_action {
    type             = "forward"
    target_group_arn = aws_lb_target_group.broker.arn
  }
}
