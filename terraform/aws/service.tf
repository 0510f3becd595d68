# The broker on ECS Fargate: desired_count tasks behind the load balancer,
# each running the API with the reconcile loop (BROKER_ENGINE=on); the shared
# Redis store makes their writes compare-and-set.
resource "aws_cloudwatch_log_group" "broker" {
  name              = "/${var.name}/broker"
  retention_in_days = var.log_retention_days
  kms_key_id        = aws_kms_key.broker.arn
}

resource "aws_ecs_cluster" "broker" {
  name = var.name
  setting {
    name  = "containerInsights"
    value = "enabled"
  }
}

resource "aws_ecs_task_definition" "broker" {
  family                   = var.name
  requires_compatibilities = ["FARGATE"]
  network_mode             = "awsvpc"
  cpu                      = var.task_cpu
  memory                   = var.task_memory
  execution_role_arn       = aws_iam_role.execution.arn
  task_role_arn            = aws_iam_role.task.arn

  runtime_platform {
    operating_system_family = "LINUX"
    cpu_architecture        = "X86_64"
  }

  container_definitions = jsonencode([{
    name      = "broker"
    image     = var.broker_image
    essential = true
    # SkyPilot writes its state, keys and logs under ~/.sky and ~/.ssh.
    readonlyRootFilesystem = false
    command                = ["broker", "serve", "--host", "0.0.0.0", "--port", tostring(local.broker_port)]
    portMappings           = [{ containerPort = local.broker_port, protocol = "tcp" }]
    environment            = [for key, value in local.environment : { name = key, value = value }]
    # ECS reads a secret when a task starts: naming its version (<arn>:<json key>:<stage>:<version id>)
    # makes a new value a new task definition, so a rotated token rolls the tasks instead of staying valid.
    secrets = [for key in local.secret_names : {
      name      = key
      valueFrom = "${aws_secretsmanager_secret.broker[key].arn}:::${aws_secretsmanager_secret_version.broker[key].version_id}"
    }]
    logConfiguration = {
      logDriver = "awslogs"
      options = {
        awslogs-group         = aws_cloudwatch_log_group.broker.name
        awslogs-region        = var.region
        awslogs-stream-prefix = "broker"
      }
    }
  }])

  lifecycle {
    # Fargate runs only these sizes (ECS developer guide, "Task CPU and memory"); the two variables
    # are validated apart, so 512 CPU with 8 GiB would pass both and fail at RegisterTaskDefinition.
    precondition {
      condition     = var.task_memory >= 2 * var.task_cpu && var.task_memory <= min(8 * var.task_cpu, 30720)
      error_message = "task_memory does not fit task_cpu on Fargate: 512 takes 1024-4096, 1024 takes 2048-8192, 2048 takes 4096-16384, 4096 takes 8192-30720."
    }
  }

  # Secrets must hold a value before a task can start.
  depends_on = [aws_secretsmanager_secret_version.broker]
}

resource "aws_ecs_service" "broker" {
  name                               = "broker"
  cluster                            = aws_ecs_cluster.broker.id
  task_definition                    = aws_ecs_task_definition.broker.arn
  desired_count                      = var.desired_count
  launch_type                        = "FARGATE"
  platform_version                   = "LATEST"
  deployment_minimum_healthy_percent = 50
  deployment_maximum_percent         = 200
  health_check_grace_period_seconds  = 60
  propagate_tags                     = "SERVICE"

  network_configuration {
    subnets          = var.private_subnet_ids
    security_groups  = [aws_security_group.service.id]
    assign_public_ip = false
  }

  load_balancer {
    target_group_arn = aws_lb_target_group.broker.arn
    container_name   = "broker"
    container_port   = local.broker_port
  }

  deployment_circuit_breaker {
    enable   = true
    rollback = true
  }

  depends_on = [aws_lb_listener.https]
}
